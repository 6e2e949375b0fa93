"""KIMERA (Winter et al., LREC 2022): knowledge injection via mask-enforced retraining of attention heads.

Modules: strategy (the `kimera` strategy, its config, checks and stage builders). Stage bodies, each with its
config: search (the mask search), search_report (the rounds' paired intervals), masks (mask files, per-head update
scaling, the random and given masks), retrain (the KG retraining), pruning (the pruned baseline), report
(kimera-report: tables, heatmaps). The parts they share: scoring (the scoring set), importance (I_h and the
search), gating (per-head gates via hooks, the architecture map), multitask (the multi-task KG model), heldout
(held-out KG triples).
"""
