module faultagent.local/testbed/mcfixtures

go 1.25
