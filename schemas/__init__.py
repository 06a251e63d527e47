"""Table schemas, timestamps and the error tree: the lowest layer, pure Python."""
