# Sourced on the GPU machine, in the checkout that a `run` call carried there, after the three runs of
# ../shared/gpu/README.md (make gpu-pack packs them): installs TVM and the wheels once (.gpu/setup.sh), puts this source
# checkout first on the path, and points the benchmarks and tests at the models and the shared data carried in
# .gpu-models. Defines `registry` as the command.
source .gpu/setup.sh || return 1
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
export TVM_REGISTRY_CORPUS="$PWD/.gpu-models" REGISTRY_SHARED_DATA="$PWD/.gpu-models/data"
registry() { python3 -c 'import sys; sys.argv[0] = "registry"; from registry.cli.main import main; main()' "$@"; }
