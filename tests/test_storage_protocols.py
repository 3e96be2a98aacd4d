"""The storage protocols (registry/store/interface.py) and the classes that claim them: each protocol is narrow, and
every implementation declares the protocols it implements and defines each of their methods with the protocol's
parameters. A signature is written once, in the protocol; this test is what holds the implementations to it."""

from __future__ import annotations

import inspect

import pytest

from registry.share.overlay import OverlayStorage
from registry.share.rest_storage import RestStorage
from registry.share.served_run import ServedRun
from registry.store import interface
from registry.store.sql.store import Store

PROTOCOLS = (
    interface.RecordReads,
    interface.RecordWrites,
    interface.LeaseStorage,
    interface.Tokens,
    interface.Sharing,
    interface.Verification,
    interface.Catalogue,
    interface.Browsing,
    interface.Administration,
)
IMPLEMENTATIONS = (Store, OverlayStorage, ServedRun)  # the last: a model run against a served registry
# Implementations of some of the protocols, with the protocols each declares: a served registry read by URL (the
# record reads too: an overlay's shared side; and verify's reads).
PARTIAL = {RestStorage: (interface.Catalogue, interface.Browsing, interface.RecordReads, interface.Verification)}
MOST_METHODS = 15


def methods(protocol: type) -> list[str]:
    """The methods a protocol itself declares (not those of the protocols it extends)."""
    return [name for name, value in vars(protocol).items() if not name.startswith("_") and inspect.isfunction(value)]


def parameters(fn) -> list[tuple[str, inspect._ParameterKind, object]]:
    """What a caller sees of a method's parameters: names, kinds and defaults (annotations are the protocol's)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_no_protocol_has_more_than_15_methods(protocol):
    assert 0 < len(methods(protocol)) <= MOST_METHODS, methods(protocol)


def test_the_composite_adds_no_method_and_has_every_protocol():
    assert methods(interface.RegistryStorage) == []
    assert set(PROTOCOLS) <= set(interface.RegistryStorage.__mro__)


def test_each_method_belongs_to_one_protocol():
    seen: dict[str, str] = {}
    for protocol in PROTOCOLS:
        for name in methods(protocol):
            assert name not in seen, f"{name} is in both {seen[name]} and {protocol.__name__}"
            seen[name] = protocol.__name__


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_an_implementation_defines_every_method_as_its_protocol_does(impl, protocol):
    assert protocol in impl.__mro__, f"{impl.__name__} does not declare {protocol.__name__}"
    for name in methods(protocol):
        owner = next(c for c in impl.__mro__ if name in vars(c))
        assert owner not in PROTOCOLS, f"{impl.__name__}.{name} is only {owner.__name__}'s stub"
        assert parameters(getattr(impl, name)) == parameters(getattr(protocol, name)), f"{impl.__name__}.{name}"


@pytest.mark.parametrize(("impl", "protocol"), [(i, p) for i, ps in PARTIAL.items() for p in ps],
                         ids=lambda v: v.__name__)  # fmt: skip
def test_a_partial_implementation_defines_every_method_of_what_it_declares(impl, protocol):
    declared = {p for p in impl.__mro__ if p in PROTOCOLS}
    assert declared == set(PARTIAL[impl]), declared
    for name in methods(protocol):
        owner = next(c for c in impl.__mro__ if name in vars(c))
        assert owner not in PROTOCOLS, f"{impl.__name__}.{name} is only {owner.__name__}'s stub"
        assert parameters(getattr(impl, name)) == parameters(getattr(protocol, name)), f"{impl.__name__}.{name}"


@pytest.mark.parametrize("impl", [*IMPLEMENTATIONS, *PARTIAL], ids=lambda c: c.__name__)
def test_no_implementation_forwards_by_attribute_lookup(impl):
    assert not any("__getattr__" in vars(c) for c in impl.__mro__ if c is not object), impl.__name__
