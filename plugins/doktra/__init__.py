"""DoKTra (Choi et al., ACL 2022): domain knowledge transfer via calibrated activation-boundary distillation.

Modules: config (options, variants), losses (confidence penalty, AB hinge, KD, L_AT), features (the paired
teacher/student feature format and collator, the width projection), trainers (Trainer subclasses for the
losses and the switch at gamma), teacher (resolving and checking the teacher), distill (the teacher side of
distillation, L_AT), report (ECE, reliability diagrams, % retained), stages, strategy.
"""
