from .cli.main import command

command()
