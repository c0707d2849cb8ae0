"""The key-group store: keyed operator state per key group, versioned by micro-batch id.

See ``store.py`` for the layout, the commit protocol and the cost model.
"""

from sluice.runtime.state.cache import FILE_CACHE, TableCache
from sluice.runtime.state.format import DELETED, KEY_GROUP
from sluice.runtime.state.index import DeltaFile, StateIndex
from sluice.runtime.state.store import KeyGroupStore

__all__ = ["DELETED", "FILE_CACHE", "KEY_GROUP", "DeltaFile", "KeyGroupStore", "StateIndex", "TableCache"]
