"""The Training tab (`panel`: the Train settings and the view of a run) and its runs list (`runs_list`)."""
