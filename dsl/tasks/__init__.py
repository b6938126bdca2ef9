"""The tasks: one folder each, holding everything of one kind of problem.

A task folder registers its inputters, augmenter, networks and modeler like any component (the
registry walks every folder here), declares its batch structure (`batch=("image", "boxes")`) and
the rules and facts only it knows, and brings its data generators and `validate --data` checks.
Nothing outside a task's folder names it: a new task is a new folder.
"""
