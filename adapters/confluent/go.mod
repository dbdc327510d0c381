module github.com/parsley-go/parsley/adapters/confluent

go 1.26.8
