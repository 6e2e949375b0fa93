"""kinject.plugins.pretrain: domain-specific pretraining (Gu et al., PubMedBERT) - in-domain corpus and
WordPiece vocabulary, whole-word-masking MLM from scratch or continual, and `kinject vocab compare`."""
