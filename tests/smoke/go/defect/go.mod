module example.com/smoke

go 1.27
