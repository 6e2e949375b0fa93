"""kinject.plugins.stilt: STILT, supplementary training on intermediate labeled-data tasks.

``strategy`` holds the `stilt` strategy (intermediate stage(s) -> target fine-tuning -> evaluation): its pydantic
options, the checks, the stage builders. ``pooler`` holds the intermediate stage's config (its pooler carried
over), ``matrix`` the target x intermediate transfer matrix (STILT's cross-run report) and ``cli`` the
``kinject stilt`` command group.
"""
