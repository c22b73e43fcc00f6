#!/usr/bin/env bash
# Sample-level DP-SGD on a smaller cut of the default federation (configs/fedavg.yaml's model and
# trainer; TeacherICU with 40 centers and 20,000 stays, 5 rounds: the per-row gradients of 230
# centers do not fit the CPU budget), clip C = 1.0, delta 1e-5; noise multipliers from
# `calibrate.py sample 40 20000 5` so that the largest center epsilon is 1, 3, 8; the infinity
# row is FedAvg on the same federation without DP. Usage: run_sample.sh OUT_ROOT
set -euo pipefail
out=${1:-runs/privacy}
common=(--config configs/fedavg.yaml --data.init_args.num_centers=40 --data.init_args.num_stays=20000
        --trainer.rounds=5 --trainer.eval_every=5 --output.root="$out" --output.progress_bar=false)
lightning_fed_fit() { python -m lightning_fed.cli fit "$@"; }
[ -f "$out/sample_inf/summary.json" ] || lightning_fed_fit "${common[@]}" --output.name=sample_inf
for pair in 8:2.557 3:5.913 1:15.918; do
  eps=${pair%%:*}; sigma=${pair##*:}
  lightning_fed_fit "${common[@]}" --output.name="sample_eps$eps" --trainer.dp.level=sample \
    --trainer.dp.noise_multiplier="$sigma" --trainer.dp.max_grad_norm=1.0 --trainer.dp.delta=1e-5
done
