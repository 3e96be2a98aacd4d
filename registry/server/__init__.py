"""``registry serve``: a registry over HTTP, for a team or the public.

- ``app``: the ASGI application (FastAPI): the JSON API under ``/api/v1``, the web view, errors as problem documents.
- ``api``: the JSON API's routes; their shapes are the CLI's ``--json`` models (``registry.schemas``).
- ``pages``: the web view, server-rendered from ``templates/`` (Jinja2, every value escaped).
- ``state``: what the routes of one app share (its storage, token gate, model pages, limits), given to each through
  ``Depends``: the routes are module-level functions.
- ``auth``: tokens (made, hashed, checked) and the roles reader, writer and admin.
- ``problems``: every refusal as one RFC 9457 problem document.
- ``limits``: what guards the server from one client: the request rate and the size of an upload.

The server reads and writes only through ``RegistryStorage``; a pushed bundle is checked exactly as ``registry
import`` checks one (``registry.share.exchange_import``). Its clients (pull, push, sync by URL) are in
``registry.share.remote``.
"""
