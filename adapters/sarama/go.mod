module github.com/parsley-go/parsley/adapters/sarama

go 1.26.8
