#!/usr/bin/env bash
# Client-level DP-FedAvg on the default federation (configs/fedavg.yaml: 230 centers, 71,000 stays,
# 50 rounds), 23 centers a round (10 %), update clip S = 0.25 (about the median center's round
# update), delta 1e-5; noise multipliers from calibrate.py for epsilon 1, 3, 8; the infinity row is
# FedAvg with the same client sampling and no DP. Usage: run_client.sh OUT_ROOT
set -euo pipefail
out=${1:-runs/privacy}
common=(--config configs/fedavg.yaml --trainer.centers_per_round=23 --trainer.eval_every=50
        --output.root="$out" --output.progress_bar=false)
lightning_fed_fit() { python -m lightning_fed.cli fit "$@"; }
lightning_fed_fit "${common[@]}" --output.name=client_inf
for pair in 1:3.185 3:1.453 8:0.857; do
  eps=${pair%%:*}; sigma=${pair##*:}
  lightning_fed_fit "${common[@]}" --output.name="client_eps$eps" --trainer.dp.level=client \
    --trainer.dp.noise_multiplier="$sigma" --trainer.dp.max_grad_norm=0.25 --trainer.dp.delta=1e-5
done
# Clipping and unweighted averaging without noise (sigma 1e-300; epsilon infinite): what the
# mechanism costs before any noise.
lightning_fed_fit "${common[@]}" --output.name=client_clip_only --trainer.dp.level=client \
  --trainer.dp.noise_multiplier=1e-300 --trainer.dp.max_grad_norm=0.25 --trainer.dp.delta=1e-5
