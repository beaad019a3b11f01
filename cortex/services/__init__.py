"""Services the HTTP handlers and the CLI call: each write (or read with logic) as one call.

A service composes the layers below it (the scheduler, the simulator, the store) so
that a handler only parses, calls and answers, and never touches SQL, the simulator or
the plugins itself.
"""
