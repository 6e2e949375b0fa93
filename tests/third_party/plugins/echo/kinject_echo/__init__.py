"""kinject-echo: an example third-party strategy plugin."""
