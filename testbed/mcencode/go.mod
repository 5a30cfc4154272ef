module faultagent.local/testbed/mcencode

go 1.25
