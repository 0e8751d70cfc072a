"""The version of reliacal, in one place: the package, the wheel and saved models read it."""

__version__ = "0.1.0"
