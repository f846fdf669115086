"""Redis persistence: keys under the ``{cmp:<id>}`` hash tag, Lua scripts, binary row blocks."""
