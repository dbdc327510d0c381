module github.com/parsley-go/parsley

go 1.26
