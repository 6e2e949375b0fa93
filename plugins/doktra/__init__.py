"""DoKTra (Choi et al., ACL 2022): domain knowledge transfer via calibrated activation-boundary distillation.

Modules: config (options, variants), losses (confidence penalty, AB hinge, KD, L_AT), features (the paired
teacher/student feature format and collator, the width projection), trainers (Trainer subclasses for the
losses and the switch at gamma), stages (the stage configs), teacher (resolving and checking the teacher; the
CTT / import / cached-outputs stage bodies), distill (the distillation stage, L_AT), report (ECE, reliability
diagrams, % retained), strategy.
"""
