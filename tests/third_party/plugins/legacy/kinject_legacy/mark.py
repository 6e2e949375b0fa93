"""The input transform: every text wrapped in its marker."""


def add_markers(examples, split, env, transform):
    marker = transform.options["marker"]
    return [{**ex, "text": f"[{marker}] {ex['text']} [/{marker}]", "context": marker} for ex in examples]
