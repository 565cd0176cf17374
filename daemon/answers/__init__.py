"""The read side served over HTTP: `admitd run` answers `explain`, `history`, `queues`, `pending` and `replay` as JSON
under `/answers/v1/` (see `daemon.answers.paths`), with exactly the shapes of the CLI's `--json`, and `admitd
explain|... --server URL` (and the `kubectl admitd` plugin) asks a daemon instead of reading the file.

`answer` (I/O: the log's reader, a thread for past moments) builds each body with `daemon.query`'s public
functions; `http` puts it on aiohttp routes; `client` is the CLI's side.
"""
