#!/usr/bin/env bash
# Builds the peers' virtual environments that benchmarks/race.py runs (race.py --peers DIR finds them):
#   DIR/jax      PureJaxRL (benchmarks/purejaxrl_cartpole.py): jax on CPU, flax, optax, distrax, gymnax
#   DIR/sb3      Stable-Baselines3 (benchmarks/sb3_cartpole.py)
#   DIR/cleanrl  CleanRL's ppo.py (benchmarks/cleanrl_ppo_cartpole.py): CleanRL pins gymnasium 0.29.1,
#                which needs numpy < 2
#   DIR/rl8      rl8 (benchmarks/rl8_cartpole.py), with its torchrl and tensordict
# Versions are pinned to those the race page was measured with, so that a rerun races the same code.
# torch: TORCH names what pip installs for it (default "torch>=2.4,<2.14"); for the CPU build give the CPU
# wheel or add its index, as the README's install says (PIP_EXTRA_INDEX_URL=... works here too).
# Usage: bash benchmarks/peer_venvs.sh DIR [jax sb3 cleanrl rl8]   (a venv that exists is left as it is)
set -euo pipefail
dir="${1:?usage: bash benchmarks/peer_venvs.sh DIR [jax sb3 cleanrl rl8]}"
shift
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(jax sb3 cleanrl rl8)
torch="${TORCH:-torch>=2.4,<2.14}"
python="${PYTHON:-python3}"

packages() {
  case "$1" in
    jax) echo "jax[cpu]==0.10.2 flax==0.12.8 optax==0.2.8 distrax==0.1.9 gymnax==1.0.1" ;;
    sb3) echo "$torch stable-baselines3==2.9.2 gymnasium==1.4.0" ;;
    cleanrl) echo "$torch gymnasium==0.29.1 numpy==1.26.4 tyro==1.0.17 tensorboard==2.21.0" ;;
    rl8) echo "$torch rl8==1.0.0 torchrl==0.14.1 tensordict==0.14.3" ;;
    *) echo "peer_venvs.sh: unknown venv '$1'; choose from: jax sb3 cleanrl rl8" >&2; return 2 ;;
  esac
}

mkdir -p "$dir"
for kind in "${kinds[@]}"; do
  spec="$(packages "$kind")"
  if [ -x "$dir/$kind/bin/python" ]; then
    echo "== $dir/$kind exists; left as it is (remove it to rebuild)"
    continue
  fi
  echo "== $dir/$kind: $spec"
  "$python" -m venv "$dir/$kind"
  # shellcheck disable=SC2086  # $spec is a list of requirements
  "$dir/$kind/bin/pip" install --quiet $spec
done
echo "== done: python benchmarks/race.py --peers $dir"
