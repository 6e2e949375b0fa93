"""DoKTra (Choi et al., ACL 2022): domain knowledge transfer via calibrated activation-boundary distillation.

Modules: config (options, variants), stages (the stage configs; CTT and cp-only subclass the kernel's
FinetuneConfig), plan (the checks run before any stage, the stage builders), losses (confidence penalty, AB hinge,
KD, L_AT), features (the paired teacher/student feature format and collator, the width projection), trainers
(Trainer subclasses for the losses and the switch at gamma), teacher (the teacher's reference and checks; the
import and cached-outputs stage bodies), distill (the distillation stage, L_AT), report (ECE, reliability
diagrams, % retained), strategy.
"""
