"""What the tests and the benches share, and nothing else imports: servers on 127.0.0.1 that stand for a Hub, a
bucket and a web mirror (storage_servers.py, http_mirror.py), and the tiny learnable data sets and random models
the workloads are tried on (mnist_data.py, qa_data.py, text_data.py). Not shipped in the wheel."""
