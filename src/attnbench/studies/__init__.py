"""Each report's measuring code, one package per notebook (named after it).

A study holds its profiles as data and the measuring functions its cells call. It may import the bench
library (`attnbench.bench`), the algorithms (`cp`, `dilated`, `kernels`, `models`) and the row schema,
never presenting code (the report package) and never another study.
"""
