package calc

// Mul is badly formatted on purpose (gofmt -l lists this file).
func Mul(a,b int) int { return a*b }
