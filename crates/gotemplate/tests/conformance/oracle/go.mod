module stacksync.dev/template-oracle

go 1.26

require github.com/go-task/slim-sprig/v3 v3.0.0
