"""The prelude of a test script that records which Numba functions its interpreter compiles.

Scripts run in a fresh interpreter (`python -c PRELUDE + body`) so that nothing the test
process compiled or loaded already hides a compile; the body reads the list `compiled`.
"""
import textwrap

PRELUDE = textwrap.dedent('''
    import json, sys
    from numba.core import event

    compiled = []

    class Compiles(event.Listener):
        def on_start(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__qualname__)

        def on_end(self, ev):
            pass

    event.register("numba:compile", Compiles())
''')
