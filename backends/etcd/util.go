package etcd

import (
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
)

func nopLogger() *zap.Logger { return zap.NewNop() }

func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || rpctypes.ErrorDesc(err) == rpctypes.ErrLeaseNotFound.Error()
}
