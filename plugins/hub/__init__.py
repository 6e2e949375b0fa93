"""`kinject push`: a run on the Hugging Face Hub - the files its strategy publishes (``Strategy.shared_files``; for MoP
also its adapters and fusion, :mod:`.mop`) and a model card written from run.json and metrics.json (:mod:`.card`; the
upload in :mod:`.push`)."""
