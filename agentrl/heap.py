"""Moved to ``agentrl.util.heap``: this path still works for one release, with a DeprecationWarning."""

from agentrl._compat import moved

moved(__name__)
