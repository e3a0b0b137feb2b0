from localjob.cli import main

main()
