# Sourced on the GPU machine, in the checkout that a `run` call carried there, after the three runs of
# ../shared/gpu/README.md (make gpu-pack packs them): installs TVM and the wheels once (.gpu/setup.sh), then makes this
# source checkout importable as the installed package is laid out (registry.cli and registry.migrations live in cli/
# and migrations/ here, which an install maps into the package), and points the benchmarks and tests at the models
# and the shared data carried in .gpu-models. Defines `registry` as the command.
source .gpu/setup.sh || return 1
[ -d registry/cli ] || cp -r cli registry/cli
[ -d registry/migrations ] || cp -r migrations registry/migrations
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
export TVM_REGISTRY_CORPUS="$PWD/.gpu-models" REGISTRY_SHARED_DATA="$PWD/.gpu-models/data"
registry() { python3 -c 'import sys; sys.argv[0] = "registry"; from registry.cli.main import main; main()' "$@"; }
