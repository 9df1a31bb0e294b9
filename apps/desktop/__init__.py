"""A desktop chat window over the public Python API (Tk): `python -m edgespec.apps.desktop`."""

from .window import ChatWindow

__all__ = ["ChatWindow"]
