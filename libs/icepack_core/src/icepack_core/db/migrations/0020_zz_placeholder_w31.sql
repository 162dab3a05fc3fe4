SELECT 1; -- local placeholder (w31), never committed
