//go:build !unix

package broker

import (
	"context"
	"errors"
)

func acquireLease(context.Context, []string) (func(), error) {
	return nil, errors.New("broker: " + EnvBrokers + " needs a unix system to lease the cluster")
}
