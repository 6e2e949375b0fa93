"""Where a run's events go: kinject's run log (:mod:`.runlog`, the ``kinject`` logger) and the experiment trackers
(``training.report_to``: a hook plugin that sends kinject's own metrics to the run's trackers, :mod:`.hooks`), each
registered through ``kinject.hooks`` as a third party's would be."""
