"""A desktop chat window over the public Python API (Tk): `python -m edgespec.apps.desktop`."""

from edgespec.apps.desktop.window import ChatWindow

__all__ = ["ChatWindow"]
