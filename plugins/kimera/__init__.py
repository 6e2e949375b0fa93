"""KIMERA (Winter et al., LREC 2022): knowledge injection via mask-enforced retraining of attention heads.

Modules: config, stages (stage configs), strategy (the `kimera` strategy and its baselines), plan (checks and stage
builders); by concern: search (the mask-search stage), search_report (the rounds' paired intervals), scoring (the
scoring set), importance (I_h and the search), gating (per-head gates via hooks, architecture map), masks (mask
files, per-head update scaling, the random and given mask stages), retrain (the KG retraining stage), multitask
(the multi-task KG model), heldout (held-out KG triples), pruning (the pruned baseline), report (the report
stage, kimera-report: tables, heatmaps).
"""
