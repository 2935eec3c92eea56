//! Built-in handlers, each enabled by `--handlers`.
