"""kinject.plugins.stilt: STILT, supplementary training on intermediate labeled-data tasks.

``strategy`` holds the `stilt` strategy (intermediate stage(s) -> target fine-tuning -> evaluation),
``config`` its pydantic options, ``matrix`` the target x intermediate transfer matrix and ``cli`` the
``kinject stilt`` command group.
"""
