"""DoKTra (Choi et al., ACL 2022): domain knowledge transfer via calibrated activation-boundary distillation.

Modules: strategy (the options and variants, the checks run before any stage, the stage builders, the Strategy
class), losses (confidence penalty, AB hinge, KD, L_AT), features (the paired teacher/student feature format and
collator, the width projection), trainers (Trainer subclasses for the losses and the switch at gamma;
CalibratedConfig, the training library's FinetuneConfig with the confidence-penalty trainer, for CTT and cp-only),
teacher (the teacher's reference and checks; the import and cached-outputs stage bodies), distill (the
distillation stage, L_AT), report (ECE, reliability diagrams, % retained). Each body module holds its stage's config.
"""
