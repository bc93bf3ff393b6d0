"""Android devices over adb: device choice, quoting, transfers, probing what MNN's QNN backend needs."""
