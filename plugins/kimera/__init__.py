"""KIMERA (Winter et al., LREC 2022): knowledge injection via mask-enforced retraining of attention heads.

Modules: gating (per-head gates via hooks, architecture map), importance (I_h and the mask search),
masks (mask files, per-head update scaling, pruning), retrain (multi-task KG model and training),
analysis (heatmaps, tables), config, strategy (the `kimera` strategy and its baselines).
"""
