from swfs.cli import main

main()
