"""Experiment trackers (``training.report_to``): a hook plugin that sends kinject's own metrics to the run's
trackers (:mod:`.hooks`), registered through ``kinject.hooks`` as a third party's would be."""
