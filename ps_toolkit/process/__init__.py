"""Starting, forking, watching and stopping task processes."""
