"""Reading a notebook: the document model, its cell attributes, front matter and PEP 723 blocks."""
