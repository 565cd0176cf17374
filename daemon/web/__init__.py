"""The read-only web view: server-rendered pages of the answers (`server`, `render`), the plots' series folded from
the log (`series`), who sees what (`policy`), and `admitd ui` (`cli`). Mounted by `admitd run --ui`."""
