# Sourced on the GPU machine, in the checkout that a `run` call carried there, after the three runs of
# ../shared/gpu/README.md (make gpu-pack packs them): installs TVM and the wheels once (.gpu/setup.sh), puts the
# installed package (the wheel gpu-pack built from this checkout) and then this checkout (tests/, bench/) on the path,
# and points the benchmarks and tests at the models and the shared data carried in .gpu-models. The package comes from
# the wheel: in the checkout its CLI and migrations live in cli/ and migrations/, which only an install maps into it.
# Defines `registry` as the command.
source .gpu/setup.sh || return 1
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
export TVM_REGISTRY_CORPUS="$PWD/.gpu-models" REGISTRY_SHARED_DATA="$PWD/.gpu-models/data"
registry() { python3 -P -c 'import sys; sys.argv[0] = "registry"; from registry.cli.main import main; main()' "$@"; }
