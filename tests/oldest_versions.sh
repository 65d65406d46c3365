#!/usr/bin/env bash
# The lower bounds setup.cfg declares are true: in a new virtual environment, install sparkbeam
# with the OLDEST version each `>=` bound of install_requires and of the [beam] extra admits
# (pyspark, attrs, cloudpickle, apache-beam), the rest of the test extra as pip resolves it,
# then run a smoke subset: the README's main example (its output checked), the batch and
# streaming oracle pairs, and the apache_beam front end's examples and runner agreement.
#
#   tests/oldest_versions.sh            # about 10 minutes of pip, then the tests
#
# When an old version fails here, raise the bound in setup.cfg rather than keep a false one.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d "${TMPDIR:-/tmp}/sparkbeam-oldest.XXXXXXXX")
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"

python - setup.cfg > "$work/oldest.txt" <<'PY'
import configparser, re, sys
config = configparser.ConfigParser()
config.read(sys.argv[1])
lines = config.get("options", "install_requires").splitlines()
lines += config.get("options.extras_require", "beam").splitlines()
for line in (l.strip() for l in lines):
    bound = re.match(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][^,;\s]*)", line)
    if bound and not line.startswith("#"):
        print(f"{bound.group(1)}=={bound.group(2)}")
PY
echo "oldest versions admitted by setup.cfg:"; sed 's/^/  /' "$work/oldest.txt"

rm -rf build ./*.egg-info
pip install -q -e ".[test]" -c "$work/oldest.txt"
pip list 2>/dev/null | grep -iE '^(pyspark|apache-beam|attrs|cloudpickle|pandas|pyarrow|numpy) '

python -m sparkbeam.examples.hourly_team_score > "$work/example.log"
python .ci/check_example_output.py "$work/example.log"

python -m pytest -p no:cacheprovider \
  tests/runners/test_batch_oracle.py \
  tests/runners/test_streaming_oracle.py \
  tests/beam_frontend/test_examples_unmodified.py \
  tests/beam_frontend/test_runners_agree.py \
  tests/test_oracle.py
