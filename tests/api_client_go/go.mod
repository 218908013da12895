module ctxledger.test/apiclient

go 1.19
