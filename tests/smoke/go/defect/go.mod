module example.com/smoke

go 1.22
