module github.com/parsley-go/parsley/adapters/kafkago

go 1.26.8
