"""ftui: fine-tune language models from a terminal dashboard."""

__version__ = "0.1.0"
