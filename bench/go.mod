module github.com/dlock-dev/dlock/bench

go 1.24

replace github.com/dlock-dev/dlock => ../
